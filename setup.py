"""Builds the native core ``promem_fast._native`` (C++17, pybind11); everything else is in pyproject.toml."""

from __future__ import annotations

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

ext_modules = [
    Pybind11Extension(
        "promem_fast._native",
        sources=["csrc/module.cpp", "csrc/anchor.cpp", "csrc/edges.cpp"],
        include_dirs=["csrc"],
        cxx_std=17,
        extra_compile_args=["-O3"],
    ),
]

setup(ext_modules=ext_modules, cmdclass={"build_ext": build_ext})
