"""The package's version, kept apart so the SDK and the server read it without importing
the package root (which imports the SDK)."""

__version__ = "0.1.0"
