"""tether's version (``tether.__version__``), in a leaf of its own: what reports it (an MCP
client's name) imports this, not the package's face, which names every module above."""

__version__ = "0.1.0"
