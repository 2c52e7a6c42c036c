"""circle-reid: person re-identification with Circle loss, AM-Softmax, MGN and friends."""
import os

from setuptools import find_packages, setup

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "README.md"), encoding="utf-8") as f:
    long_description = f.read()

setup(
    name="circle-reid",
    version="0.1.0",
    description="Person re-identification toolkit: ResNet50/MGN, Circle loss and margin heads, "
    "fast CMC/mAP/mINP evaluation and scalable k-reciprocal re-ranking.",
    long_description=long_description,
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.9",
    packages=find_packages(include=["reid", "reid.*"]),
    # Compatible ranges; CI pins exact versions in requirements/ci.txt.
    install_requires=[
        "torch>=2.1,<3",
        "torchvision>=0.16",
        "yacs>=0.1.8",
        "opencv-python-headless>=4.5",
        "numpy>=1.22",
        "scipy>=1.8",
        "h5py>=3.0",  # CUHK03's official cuhk-03.mat is MATLAB 7.3 = HDF5, which scipy.io cannot read
        "matplotlib>=3.5",
        "gdown>=4.6",
        "tqdm>=4.62",  # progress bars; tqdm.contrib.logging routes log lines around them
        "PyYAML>=5.4",
    ],
    extras_require={
        "dev": ["pytest>=7"],
        # Optional extras: ONNX export check, TensorBoard events, faiss search, safetensors galleries.
        "export": ["onnx>=1.14", "onnxruntime>=1.16"],
        "tensorboard": ["tensorboard>=2.12"],
        "faiss": ["faiss-cpu>=1.7.4"],  # per-call SearchParameters (ivf, hnsw backends)
        "safetensors": ["safetensors>=0.4"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Image Recognition",
    ],
)
