"""One thin module per command: options -> recipe -> library call -> summary."""
