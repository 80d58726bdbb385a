"""Scores and metrics into verdicts: scoring, statistics, gates."""
