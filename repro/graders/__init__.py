"""Graders: math (boxed answer + math-verify) and code (LiveCodeBench rules, in the sandbox)."""
