"""Declarative tasks: a folder with a task.yaml becomes a Task without any Python from its author.

A pack is a normal distribution whose `mlab` entry point names a package folder holding task folders
(`mypack = "mlab_mypack"`, each `mlab_mypack/<task>/task.yaml`); see CONTRIBUTING.md.
"""
