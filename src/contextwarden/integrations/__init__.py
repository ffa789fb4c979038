"""Drop-in context management for agent frameworks, one module per framework.

=========================  ==========================================================  ===============
module                     what it gives the framework                                 extra
=========================  ==========================================================  ===============
``integrations.langchain``  `ContextWardenMiddleware` (LangChain v1 agents) and          ``langchain``
                           `pre_model_hook` (LangGraph)
``integrations.agents``     `ContextWardenSession` and `ContextWardenInputFilter`       ``agents``
                           (OpenAI Agents SDK)
``integrations.pydantic_ai``  `ContextWardenHistory` (a history processor) and the        ``pydantic-ai``
                           message converters
``integrations.llamaindex``  `ContextWardenMemory` (a LlamaIndex memory)                 ``llamaindex``
=========================  ==========================================================  ===============

Each module imports its framework; importing this package imports none of them.
"""

from __future__ import annotations
