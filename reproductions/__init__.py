"""The papers' reproductions, one module per experiment (``registry.py`` lists them): in the repository, not in the
installed package. ``minibatch-mcmc reproduce NAME`` runs one from a checkout; they need the ``reproductions`` extra
(matplotlib) and import only the public modules of ``minibatch_mcmc``."""
