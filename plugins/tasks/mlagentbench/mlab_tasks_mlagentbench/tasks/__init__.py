"""The pack's tasks, one module per task family; the package's __init__ registers each by name."""
