"""Tests of checkpoint files, resume and files from strangers (checkpoints/)."""
