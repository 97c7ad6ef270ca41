"""In-tree torch-backed implementations (the default ``native`` target), written from the
specs. Each catalogued bug is a named switch (``sim/native/bugs.py``), off by default."""
