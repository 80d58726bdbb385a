"""Configuration: YAML configs and model lists into frozen types, and the plan derived from them."""
