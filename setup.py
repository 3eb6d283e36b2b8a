"""Package discovery for the wheel and the sdist (the metadata is in pyproject.toml).

Every package under ``costmodel/`` is found, with the top-level ``costmodel_entry`` module (the console script,
which handles Ctrl-C before costmodel is imported), and the architectures in ``graphs/`` are found and installed
under the import name ``costmodel_graphs`` (a top-level ``graphs`` could collide with other distributions).
"""

from setuptools import find_namespace_packages, find_packages, setup

# namespace packages too: the data folders (devices/data, render/assets...) are importable folders, which
# setuptools names "Package would be ignored" unless listed (their files are package-data of costmodel)
ENGINE = find_namespace_packages(include=["costmodel", "costmodel.*"], exclude=["*.__pycache__"])
ARCHITECTURES = ["costmodel_graphs", *(f"costmodel_graphs.{p}" for p in find_packages("graphs"))]

setup(
    packages=ENGINE + ARCHITECTURES, package_dir={"costmodel_graphs": "graphs"}, py_modules=["costmodel_entry"]
)  # the console script: Ctrl-C handled before costmodel is imported
