"""Package-data home of the kernel sources.

pyproject.toml maps the package ``marlin_cupy._cuda`` to the top-level ``cuda/`` folder, so an
installed wheel carries ``cuda/*.cu`` and ``cuda/*.cuh`` here. In a source tree this file only
lets setuptools discover the package; ``jit.cuda_dir()`` reads ``cuda/`` directly.
"""
