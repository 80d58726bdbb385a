"""The engine stage: vLLM server process, OpenAI-compatible client, engine facts, /metrics, one variant's session."""
