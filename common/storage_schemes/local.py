"""The local disk: plain paths and ``file://`` URIs (written through a temporary file and
``os.replace``, see ``common.storage``)."""
from common.storage_schemes import Scheme

SCHEME = Scheme(names=("file", "local"), local=True)
