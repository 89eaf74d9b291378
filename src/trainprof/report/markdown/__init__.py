"""Markdown for a pull-request comment."""
