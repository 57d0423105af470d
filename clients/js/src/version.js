export const VERSION = "0.1.0";  // the Python package's version (setup.py); a test keeps them equal
