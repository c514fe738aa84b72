"""simulate package."""
