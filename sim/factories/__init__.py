"""Each subsystem's target factories, one module per subsystem (``sim/factories/<s>.py``):
``(target, **world) -> implementation`` for each target base it has. Its manifest
(``sim/manifests/<s>.py``) names them; ``sim/targets.py`` looks them up there. Each factory
imports its implementation when called, so building the registry imports neither torch nor
vLLM."""
