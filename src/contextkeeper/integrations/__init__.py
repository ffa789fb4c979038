"""Drop-in context management for agent frameworks, one module per framework.

=========================  ==========================================================  ===============
module                     what it gives the framework                                 extra
=========================  ==========================================================  ===============
``integrations.langchain``  `ContextKeeperMiddleware` (LangChain v1 agents) and          ``langchain``
                           `pre_model_hook` (LangGraph)
``integrations.agents``     `ContextKeeperSession` and `ContextKeeperInputFilter`       ``agents``
                           (OpenAI Agents SDK)
``integrations.pydantic_ai``  `ContextKeeperHistory` (a history processor) and the        ``pydantic-ai``
                           message converters
``integrations.llamaindex``  `ContextKeeperMemory` (a LlamaIndex memory)                 ``llamaindex``
=========================  ==========================================================  ===============

Each module imports its framework; importing this package imports none of them.
"""

from __future__ import annotations
