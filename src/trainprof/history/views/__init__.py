"""The history read by people: terminal, HTML, export, trends and regressions."""
