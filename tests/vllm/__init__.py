"""Tests against the real vLLM 0.33.0; they run only where vLLM is installed (`make test-vllm`)."""
