"""The service's parts, built from the config in dependency order, each given what it needs when it is made
(nothing is wired into a part after it exists): the runtime (key, relays, stores, caches) first, then the parts on
it. :class:`Parts` holds them while the service runs; :class:`~.app.AppService` starts and stops them."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent.dm.signer import LocalDmSigner, SignerDmSigner
from ..agent.documents.codec import NIP44_MAX_BYTES, DocumentCodec
from ..agent.documents.keys import DocumentKey
from ..agent.identity.codecs import ProfileCodec, TagListCodec
from ..agent.memory.codec import MemoryCodec
from ..agent.soul.codec import SoulCodec
from ..agent.soul.template import SoulTemplate
from ..agent.tasks.codec import TasksCodec
from ..agent.tools.permission import PermissionGate
from ..agent.tools.registry import ToolRegistry
from ..config import Config
from .agent_signer import remote_signer_bound
from .attach import AttachTarget
from .attached_chat import AttachedChat
from .bundle import BundleService
from .chat import ChatService
from .conversation import Conversation
from .dm import DmService
from .documents import DocumentService
from .events import SelfContextChanged, ServiceEvent
from .identity import IdentityService
from .live_policy import LivePolicy
from .merge import MergeService
from .model import ModelService
from .prompt import PromptService
from .relays import RelayService
from .runtime import Runtime, open_runtime
from .sessions import Sessions
from .soul import SoulService


def document_codecs(*, limits: Mapping[DocumentKey, int], registry: ToolRegistry, initial_soul: SoulTemplate,
                    memory_max_bytes: int = NIP44_MAX_BYTES,
                    memory_bytes_bound: str | None = None) -> dict[DocumentKey, DocumentCodec[Any]]:
    """Every document's codec, each from its concept's package (the document model knows none of them).
    ``limits``: the memories' character limits from the config; ``memory_max_bytes``: less than NIP-44's when the
    key is in a remote signer, named by ``memory_bytes_bound``."""
    return {
        DocumentKey.SHORT_TERM: MemoryCodec(DocumentKey.SHORT_TERM, limits[DocumentKey.SHORT_TERM],
                                            memory_max_bytes, memory_bytes_bound),
        DocumentKey.LONG_TERM: MemoryCodec(DocumentKey.LONG_TERM, limits[DocumentKey.LONG_TERM],
                                           memory_max_bytes, memory_bytes_bound),
        DocumentKey.SOUL: SoulCodec(registry, initial_soul),
        DocumentKey.TASKS: TasksCodec(),
        DocumentKey.PROFILE: ProfileCodec(),
        DocumentKey.CONTACTS: TagListCodec(DocumentKey.CONTACTS),
        DocumentKey.RELAYS: TagListCodec(DocumentKey.RELAYS),
    }


@dataclass(frozen=True, slots=True)
class Parts:
    """What exists only while the service runs: never None inside (``prompt``: only where the agent runs; ``dm``:
    only when it answers direct messages)."""

    runtime: Runtime
    documents: DocumentService
    identity: IdentityService
    chat: Conversation  # ChatService where the agent runs, AttachedChat when attached to it
    prompt: PromptService | None  # None when attached: the agent assembles its prompt where it runs
    soul: SoulService
    merges: MergeService
    relays: RelayService
    bundle: BundleService
    dm: DmService | None


async def build_parts(
    config: Config,
    *,
    data_dir: Path,
    env: Mapping[str, str],
    admin_pubkey: str | None,
    policy: LivePolicy,
    soul: SoulTemplate,
    registry: ToolRegistry,
    model: ModelService,
    gate: PermissionGate,
    emit: Callable[[ServiceEvent], None],
    warn: Callable[[str], None],
    clock: Callable[[], float] = time.time,
    client_options: Mapping[str, Any] | None = None,
    read_only: bool = False,
    answer_dms: bool = False,
    attach: AttachTarget | None = None,
) -> Parts:
    """Open the runtime and build every part on it (no fetching yet: :meth:`AppService.start` does that). A failure
    on the way closes what was opened."""
    codecs = document_codecs(limits={DocumentKey.SHORT_TERM: config.memory.short_term_max_chars,
                                     DocumentKey.LONG_TERM: config.memory.long_term_max_chars},
                             registry=registry, initial_soul=soul, **remote_signer_bound(config))
    runtime = await open_runtime(
        config, data_dir, env, admin_pubkey=admin_pubkey, clock=clock, client_options=client_options or {},
        emit=emit, warn=warn, codecs=codecs, read_only=read_only, attach=attach)
    try:
        documents = DocumentService(store=runtime.store, saves=runtime.saves, sync=runtime.sync,
                                    publisher=runtime.publisher, pool=runtime.pool,
                                    agent_identity=runtime.identities.agent, memory_manager=runtime.memory_manager,
                                    tasks=runtime.tasks, daemons=runtime.daemons,
                                    readable=runtime.documents_readable, emit=emit, warn=warn)
        identity = IdentityService(runtime.identities, pool=runtime.pool, store=runtime.store, saves=runtime.saves,
                                   tasks=runtime.tasks, closers=runtime.closers, config=config, clock=clock,
                                   warn=warn, data_dir=data_dir,
                                   emit_changed=lambda: emit(SelfContextChanged("agent")),
                                   emit_admin_changed=lambda: emit(SelfContextChanged("admin")))
        sessions = Sessions(runtime.conversations, keep_assemblies=config.llm.saved_assemblies)
        chat: Conversation
        prompt, local = None, None  # the agent's prompt and its chat: only where it runs
        if attach is None:
            prompt = PromptService(config, registry=registry, model=model, conversations=runtime.conversations,
                                   memory_manager=runtime.memory_manager, tool_context=runtime.tool_context,
                                   clock=clock, emit=emit, gate=gate)
            chat = local = ChatService(config, sessions=sessions, prompt=prompt, registry=registry, model=model,
                                       memory_manager=runtime.memory_manager, warn=warn, gate=gate)
        else:
            chat = AttachedChat(config.attach, target=attach, sessions=sessions, pool=runtime.pool,
                                own_relay=lambda: runtime.embedded_relay_url, relay_timeout_s=config.relays.timeout_s,
                                data_dir=data_dir, closers=runtime.closers, clock=clock, emit=emit, warn=warn)
        dm = None
        if answer_dms and local is not None:
            # The key in hand seals on a worker thread (the fast path); a remote signer is asked for each seal.
            dm_signer = LocalDmSigner(runtime.key) if runtime.key is not None else SignerDmSigner(runtime.signer)
            dm = DmService(local, signer=dm_signer, pool=runtime.pool, conversations=runtime.conversations,
                           identities=runtime.identities, daemons=runtime.daemons, closers=runtime.closers,
                           timeout_s=runtime.timeout_s, config=config, policy=policy, data_dir=data_dir,
                           clock=clock, emit=emit, warn=warn)
        soul_part = SoulService(documents, store=runtime.store, tasks=runtime.tasks, configured=soul, warn=warn)
        merges = MergeService(documents, saves=runtime.saves, history=runtime.history,
                              model=model if local is not None else None)
        bundle = BundleService(key=runtime.key, signer=runtime.signer, pool=runtime.pool, publisher=runtime.publisher,
                               conversations=runtime.conversations, timeout_s=runtime.timeout_s, clock=clock)
        relays = RelayService(pool=runtime.pool, keeper=runtime.relay_keeper, store=runtime.store,
                              identities=runtime.identities)
        return Parts(runtime, documents, identity, chat, prompt, soul_part, merges, relays, bundle, dm)
    except BaseException:
        await runtime.stop()
        raise
