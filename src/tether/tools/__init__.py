"""The tool seam: how every tool, whatever its source, is one shape the loop and the gate
read (``tool``), and where tools come from (``toolsets``, ``function``)."""
