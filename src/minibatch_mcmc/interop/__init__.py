"""Use from other libraries' loops and models: ``interop.blackjax`` (BlackJAX ``SamplingAlgorithm``s).

Submodules are imported on demand so that an optional peer library is never a dependency of the package.
"""
