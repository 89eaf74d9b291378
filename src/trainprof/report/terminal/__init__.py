"""The terminal report: rich tables for the overview and for each section."""
