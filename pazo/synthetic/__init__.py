"""Synthetic problems with known structure, for experiments about the methods themselves."""
