"""evalrun's vLLM plugin (fault injection; async scheduling on CPU). Imports nothing else of evalrun."""
