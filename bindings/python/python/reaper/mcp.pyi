from contextlib import AbstractAsyncContextManager
from typing import Any, Mapping, Optional, TextIO, Union

from mcp.client.stdio import StdioServerParameters as StdioServerParameters

from . import Limits

def stdio_client(
    server: StdioServerParameters,
    errlog: TextIO = ...,
    *,
    grace: float = 2.0,
    limits: Union[Limits, Mapping[str, Any], None] = None,
    sandbox: Optional[str] = None,
) -> AbstractAsyncContextManager[Any]: ...
