"""KV snapshot leases in ZooKeeper: a header znode and part znodes per lease, written so
that a crash at any point leaves the old or the new lease."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from fluss_spark.errors import CorruptMessage, FlussError
from fluss_spark.metadata import layout, lease_codec
from fluss_spark.metadata.layout import LeaseRecord
from fluss_spark.metadata.lease_codec import PinChanges
from fluss_spark.metadata.zk import ZkSession, retriable_on_connection_loss
from fluss_spark.protocol.codec import packb


@retriable_on_connection_loss
class ZkLeaseStore:
    """The coordinator's ``LeaseStore``: leases under ``/fluss/leases/kv_snapshot``.

    Keeps what it last wrote or read of each lease, so the next write sends only the parts
    that changed (dropped whenever a write's outcome is unknown).
    """

    def __init__(self, session: ZkSession):
        self._session = session
        self._lease_states: dict[str, _LeaseState] = {}

    @property
    def address(self) -> str:
        return self._session.address

    @property
    def zk(self):
        return self._session.zk

    def lease_ids(self) -> list[str]:
        return sorted(self._session.children(layout.LEASES))

    def save_lease(self, record: LeaseRecord,
                   changed: PinChanges | None = None) -> int:
        """Write a lease; returns the bytes now stored for it (header plus part znodes).

        ``changed``: ``{table_id: buckets}`` (a table's own pins) and ``{(table_id,
        partition_id): buckets}`` (a partition's) whose pins differ from the last record this
        store wrote or loaded for the lease (None for a whole table or partition; one not named
        is unchanged);
        only their parts are encoded and written. Without it every part is encoded again and
        only those whose bytes differ are written. See LeaseRecord for why a crash at any point
        leaves the old or the new lease.
        """
        lease_id = layout.check_lease_id(record.lease_id)
        path = layout.lease_path(lease_id)
        for _ in range(5):
            state = self._lease_states.get(lease_id)
            if state is None:
                state = self._read_lease_state(path)
                changed = None
            try:
                return self._write_lease(path, record, state, changed)
            except _StaleLease:
                self._lease_states.pop(lease_id, None)
            except BaseException:
                # Unknown what ZooKeeper applied: read it again before the next write.
                self._lease_states.pop(lease_id, None)
                raise
        raise FlussError(f"lease {lease_id}: its znodes kept changing under this writer; "
                         "is another coordinator writing?")

    def _read_lease_state(self, path: str) -> "_LeaseState | None":
        """What is stored for a lease, without decoding its pins (None when absent)."""
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return None
        header = LeaseRecord.decode_header(data)
        children = set(self._session.children(path))
        return _LeaseState(version=stat.version, generation=_max_generation(header, children),
                           parts={}, refs={}, children=children, complete=False)

    def _write_lease(self, path: str, record: LeaseRecord, state: "_LeaseState | None",
                     changed) -> int:
        encoded = self._encode_lease(record, state, changed)
        inline, children = lease_codec.place_lease_parts(encoded)
        generation = (state.generation if state else 0) + 1
        refs, names, creates = [], {}, []
        for key in children:
            data = encoded[key]
            old_name = state.refs.get(key) if state else None
            parsed = lease_codec.parse_lease_part_name(old_name) if old_name is not None else None
            if state is not None and parsed is not None and state.parts.get(key) == data:
                gen = parsed[2]
                names[key] = old_name
            else:
                gen = generation
                names[key] = lease_codec.lease_part_name(key[0], key[2], gen, key[1])
                creates.append((names[key], data))
            refs.append(lease_codec.lease_ref(key, gen, data))
        header = record.header(generation, [encoded[k] for k in inline], refs)
        keep = set(names.values())
        deletes = sorted(state.children - keep) if state else []
        created_size = sum(len(d) for _, d in creates)
        if len(header) + created_size <= lease_codec.LEASE_MULTI_BYTES:
            tx = self._session.transaction()
            if state is None:
                tx.create(path, header)
            for name, data in creates:
                tx.create(f"{path}/{name}", data)
            if state is not None:
                tx.set_data(path, header, version=state.version)
            for name in deletes:
                tx.delete(f"{path}/{name}")
            results = self._session.commit(tx, f"save lease {record.lease_id}")
            if any(isinstance(r, Exception) for r in results):
                raise _StaleLease()
            version = 0 if state is None else results[len(creates)].version
        else:
            version = self._write_lease_in_steps(path, record, state, header, creates, deletes)
        self._lease_states[record.lease_id] = _LeaseState(
            version=version, generation=generation, parts=encoded,
            refs={k: names[k] for k in children}, children=keep, complete=True)
        return len(header) + sum(len(encoded[k]) for k in children)

    def _write_lease_in_steps(self, path: str, record: LeaseRecord, state, header: bytes,
                              creates: list, deletes: list) -> int:
        """A lease write too big for one multi: the new parts first (several multis; a crash
        leaves orphans that no header names), then one multi that switches the header and
        deletes the replaced parts. Returns the header's new znode version."""
        version = state.version if state is not None else None
        pending = list(creates)
        if state is None:
            # The parent comes first; until the switch it says "writing" and a loader
            # discards such a never-acknowledged lease.
            try:
                self._session.write("create", path, record.header(0, [], [], state="writing"))
            except NodeExistsError:
                raise _StaleLease() from None     # created meanwhile by another writer
            version = 0
        while pending:
            tx, size = self._session.transaction(), 0
            while pending and (size == 0 or size + len(pending[0][1])
                               <= lease_codec.LEASE_MULTI_BYTES):
                name, data = pending.pop(0)
                tx.create(f"{path}/{name}", data)
                size += len(data)
            if any(isinstance(r, Exception) for r in self._session.commit(tx, "write lease parts")):
                raise _StaleLease()
        tx = self._session.transaction()
        tx.set_data(path, header, version=version)
        for name in deletes:
            tx.delete(f"{path}/{name}")
        results = self._session.commit(tx, f"save lease {record.lease_id}")
        if any(isinstance(r, Exception) for r in results):
            raise _StaleLease()
        return results[0].version

    @staticmethod
    def _encode_lease(record: LeaseRecord, state: "_LeaseState | None", changed
                      ) -> dict[tuple[int, int, int], bytes]:
        """``{(table_id, partition, part): encoded part}`` of the record; parts that
        ``changed`` says are unchanged are taken from what was last written."""
        if changed is None or state is None or not state.complete:
            return {lease_codec.entry_key(e): packb(e)
                    for e in lease_codec.encode_lease_pins(record.tables, record.partitions)}
        changed = {_group(g): buckets for g, buckets in changed.items()}
        groups = record.groups()
        encoded: dict[tuple[int, int, int], bytes] = {}
        cached_groups = {(t, p) for t, p, _ in state.parts}
        for (t, p, k), data in state.parts.items():
            if (t, p) in groups and (t, p) not in changed:
                encoded[(t, p, k)] = data
        for (t, p), pins in groups.items():
            if not pins or ((t, p) not in changed and (t, p) in cached_groups):
                continue
            buckets = changed.get((t, p))
            parts = (None if buckets is None
                     else {b // lease_codec.LEASE_PART_BUCKETS for b in buckets})
            if parts is not None:
                for (ct, cp, k), data in state.parts.items():
                    if (ct, cp) == (t, p) and k not in parts:
                        encoded[(t, p, k)] = data
            if any(b < 0 for b in (buckets or ())):
                raise ValueError(f"lease pins of table {t}: a bucket is negative")
            for k, (bs, ss) in lease_codec.table_parts(pins, parts).items():
                if len(bs):
                    encoded[(t, p, k)] = packb(lease_codec.encode_lease_part(t, k, bs, ss, p))
        return encoded

    def load_lease(self, lease_id: str) -> LeaseRecord | None:
        """Read one lease; None when absent or when its first write never finished."""
        path = layout.lease_path(lease_id)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return None
        header = LeaseRecord.decode_header(data)
        if header.get("state") == "writing":
            return None
        if "refs" in header:
            names = [lease_codec.ref_part_name(ref) for ref in header["refs"]]
            parts = dict(zip(names, self._get_all(path, names, lease_id)))
            rec = LeaseRecord.decode(header, parts=parts)
            keys = {}
            for raw in header.get("parts") or []:
                keys[lease_codec.entry_key(lease_codec.unpack_part(raw, lease_id))] = raw
            refs = {}
            for ref, name in zip(header["refs"], names):
                key = lease_codec.parse_lease_ref(ref)[0]
                keys[key] = parts[name]
                refs[key] = name
            children = set(self._session.children(path))
            self._lease_states[lease_id] = _LeaseState(
                version=stat.version, generation=_max_generation(header, children), parts=keys,
                refs=refs, children=children, complete=True)
            return rec
        n = int(header.get("chunks", 0))
        chunks = []
        if n:
            gen = int(header["generation"])
            chunks = self._get_all(path, [lease_codec.lease_chunk_name(gen, i) for i in range(n)],
                                   lease_id)
        return LeaseRecord.decode(header, chunks)

    def _get_all(self, path: str, names: list[str], lease_id: str) -> list[bytes]:
        futures = [self.zk.get_async(f"{path}/{name}") for name in names]
        try:
            return [f.get()[0] for f in futures]
        except NoNodeError:
            raise CorruptMessage(f"lease {lease_id}: a child znode its header names is "
                                 "missing") from None

    def load_leases(self) -> list[LeaseRecord]:
        """Every stored lease; unfinished first writes are removed, not returned."""
        out = []
        for lease_id in self.lease_ids():
            rec = self.load_lease(lease_id)
            if rec is None:
                self.delete_lease(lease_id)
            else:
                out.append(rec)
        return out

    def delete_lease(self, lease_id: str) -> None:
        """Delete a lease and its child znodes in one transaction.

        A recursive delete cut off by a lost connection would leave a header whose parts are
        gone, which no loader can read back (and a coordinator could then never recover).
        """
        self._lease_states.pop(lease_id, None)
        path = layout.lease_path(lease_id)
        children = self._session.children(path)
        if not children:
            try:
                self._session.write("delete", path)
                return
            except NoNodeError:
                return
            except NotEmptyError:
                children = self._session.children(path)   # parts appeared since we looked
        tx = self._session.transaction()
        for child in children:
            tx.delete(f"{path}/{child}")
        tx.delete(path)
        results = self._session.commit(tx, f"delete lease {lease_id}")
        if any(isinstance(r, Exception) for r in results):
            # The children changed under us (only an operator could do that): delete what is
            # there now, child by child.
            try:
                self._session.delete_tree(path)
            except NoNodeError:
                pass

    def lease_stored_bytes(self, lease_id: str) -> int:
        """Bytes the lease occupies in ZooKeeper (header plus children), for metrics and benches."""
        path = layout.lease_path(lease_id)
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return 0
        children = self._session.children(path)
        return len(data) + sum(len(self.zk.get(f"{path}/{c}")[0]) for c in children)


@dataclass
class _LeaseState:
    """A lease as stored: header znode version, generation, encoded parts and child znodes."""

    version: int
    generation: int
    parts: dict          # (table_id, partition, part) -> encoded bytes, every part of the lease
    refs: dict           # (table_id, partition, part) -> name of the child znode holding it
    children: set        # names of the lease znode's children (parts and orphans)
    complete: bool       # False: parts unknown (read without decoding), encode everything


def _group(key) -> tuple[int, int]:
    """A ``changed`` key as a pin group: a table id, or (table_id, partition_id)."""
    if isinstance(key, tuple):
        return int(key[0]), int(key[1])
    return int(key), lease_codec.NO_PARTITION


class _StaleLease(Exception):
    """The lease changed in ZooKeeper since this store last saw it: read it again."""


def _max_generation(header: dict, children: Iterable[str]) -> int:
    """The highest generation of the header and of any child (orphans included), so a new
    generation's names never collide with a child left by an interrupted write."""
    gens = [int(header.get("generation", 0) or 0)]
    for child in children:
        part = lease_codec.parse_lease_part_name(child)
        chunk = lease_codec.parse_lease_chunk_name(child)
        if part is not None:
            gens.append(part[2])
        elif chunk is not None:
            gens.append(chunk[0])
    return max(gens)

