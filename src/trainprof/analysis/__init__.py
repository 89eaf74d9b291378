"""The facts of a trace, in folders by subject (docs/architecture.md)."""
