"""File-system primitives shared by every layer (atomic writes, disk-full detection)."""
