# Patch of the simulated cluster: bind-mounted read-only over vllm/_version.py
# of the engine, the way a real deployment mounts a fixed dspark.py. The
# version string marks that the patch is in effect.
from __future__ import annotations

__all__ = [
    "__version__",
    "__version_tuple__",
    "version",
    "version_tuple",
    "__commit_id__",
    "commit_id",
]

version: str
__version__: str
__version_tuple__: tuple[int | str, ...]
version_tuple: tuple[int | str, ...]
commit_id: str | None
__commit_id__: str | None

__version__ = version = '0.32.0+dgxspark.patched'
__version_tuple__ = version_tuple = (0, 32, 0)

__commit_id__ = commit_id = None
