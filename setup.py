"""Packaging metadata for ldpflow: the only place that holds it (also staged by --setup_file)."""

import pathlib

import setuptools

HERE = pathlib.Path(__file__).parent
README = (HERE / "README.md").read_text(encoding="utf-8") if (HERE / "README.md").exists() else ""

#: What the wire layer reads and writes files with (every engine's workers need it).
WIRE = ["fastavro>=1.9", "pyarrow>=14", "polars>=1.20", "cramjam>=2.7"]

setuptools.setup(
    name="ldpflow",
    version="0.1.0",
    description=(
        "Local differential privacy frequency estimation and heavy hitters on Apache Beam"
    ),
    long_description=README,
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE"],
    python_requires=">=3.10",
    packages=setuptools.find_packages(include=["ldpflow", "ldpflow.*"]),
    package_data={"ldpflow.schemas": ["*.avsc"], "ldpflow": ["py.typed"]},
    include_package_data=True,
    install_requires=["numpy>=1.26", "scipy>=1.11"],
    extras_require={
        "beam": ["apache-beam>=2.77,<3", *WIRE],
        # The job plan's engines (docs/engines.md): the wire layer's packages, and the engine.
        "dask": ["dask[distributed]>=2024.1", *WIRE],
        "spark": ["pyspark>=3.5", *WIRE],
        "gcp": ["google-cloud-pubsub>=2.1,<3"],
        "plot": ["matplotlib>=3.7"],
        "test": ["pytest>=7.4", "hypothesis>=6.90", "mypy>=1.8", "ruff>=0.17,<0.18"],
    },
    entry_points={"console_scripts": ["ldpflow=ldpflow.pipelines.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Security",
        "Topic :: Scientific/Engineering :: Mathematics",
    ],
)
