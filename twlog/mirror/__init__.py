"""Mirroring between clusters (the paper's section 4): C{twlog mirror}'s embedded consumers and its target side."""
