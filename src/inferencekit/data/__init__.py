"""Prompt sets and datasets: the packaged dev set, user JSONL files, ShareGPT, token-exact random."""
