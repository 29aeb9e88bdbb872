"""Builds the one private extension, halide_buffer._core, from the sorted sources in csrc/."""

import glob

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

ParallelCompile("HALIDE_BUFFER_BUILD_JOBS", default=2).install()

core = Pybind11Extension(
    "halide_buffer._core",
    sorted(glob.glob("csrc/*.cpp")),
    depends=sorted(glob.glob("csrc/*.h")),
    cxx_std=17,
)

setup(ext_modules=[core], cmdclass={"build_ext": build_ext})
