"""The deterministic world and the implementations under test (native and vLLM adapters)."""
