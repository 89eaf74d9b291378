"""Renderers only, in folders by output (docs/architecture.md)."""
