"""The typed contract on disk: samples (JSONL), the run record (run.json), stored baselines."""
