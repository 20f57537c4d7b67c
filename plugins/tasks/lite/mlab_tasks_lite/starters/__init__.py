"""Starter scripts: each is copied into the workspace as train.py."""
