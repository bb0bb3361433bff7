"""The torch op libraries: the project's ``eqsat::`` ops, their reference kernels, vLLM's stand-ins."""
