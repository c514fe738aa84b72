"""nvml package."""
