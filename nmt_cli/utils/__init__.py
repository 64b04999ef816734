"""Small, specific helpers shared by the library modules."""
