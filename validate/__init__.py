"""Post-deploy gate for SGLang servers (``python -m validate gate ...``)."""

__version__ = "0.1.0"
