"""A lease on a gs:// workdir: the object DIR/lease.json, created only if absent and renewed,
replaced or deleted only at the generation this run last wrote (Cloud Storage's generation
preconditions), so that two runs can never both believe they hold it."""

import json
import sys

from trm_spmd import bucket, fs
from trm_spmd.errors import UserError
from trm_spmd.lease.holder import (HEARTBEAT_S, RECORD, TAKEOVER_FLAG, LeaseHeld, describe, holder_is_dead, is_stale,
                                   parse_record, refusal)


class GcsStore:
    """The lease object on Cloud Storage, every write conditional on its generation. Each request
    is retried for at most `deadline_s` (google-cloud-storage's default is 120 s): a heartbeat
    retries at the next one, and a run stopping does not wait minutes to release."""

    def __init__(self, url, deadline_s=HEARTBEAT_S):
        try:
            from google.api_core import exceptions
            from google.cloud import storage
            from google.cloud.storage.retry import DEFAULT_RETRY
        except ImportError:
            raise UserError(f'{url}: gs:// workdirs need google-cloud-storage: PY=$(bash launch/setup.sh --gcs) '
                            f'and run with that $PY') from None
        bucket_name, _, name = url[len('gs://'):].partition('/')
        self._exceptions = exceptions
        self._retry = dict(retry=DEFAULT_RETRY.with_timeout(deadline_s), timeout=deadline_s)
        self._bucket = storage.Client().bucket(bucket_name)
        self._name = name

    def create_if_absent(self, data):
        """The new generation, or None when the object exists."""
        return self._write(data, 0)

    def replace_if_generation(self, data, generation):
        """The new generation, or None when the object is not at `generation` (or is gone)."""
        return self._write(data, generation)

    def _write(self, data, generation):
        blob = self._bucket.blob(self._name)
        try:
            blob.upload_from_string(data, content_type='application/json', if_generation_match=generation,
                                    **self._retry)
        except (self._exceptions.PreconditionFailed, self._exceptions.NotFound):
            return None
        return blob.generation

    def read(self):
        """(bytes, generation), or None when there is no object."""
        blob = self._bucket.get_blob(self._name, **self._retry)
        if blob is None:
            return None
        try:
            return blob.download_as_bytes(if_generation_match=blob.generation, **self._retry), blob.generation
        except (self._exceptions.PreconditionFailed, self._exceptions.NotFound):
            return self.read()   # replaced or deleted between the two requests: look again

    def delete_if_generation(self, generation):
        """True when deleted; False when the object is not at `generation`."""
        try:
            self._bucket.blob(self._name).delete(if_generation_match=generation, **self._retry)
        except (self._exceptions.PreconditionFailed, self._exceptions.NotFound):
            return False
        return True


class BucketLease:
    kind = 'remote'

    def __init__(self, workdir, store, stale_after_s, clock):
        self.workdir = workdir
        self.store = store
        self.stale_after_s = stale_after_s
        self.clock = clock
        self.generation = None
        self.taken_over = None       # the record of the stale or dead holder this run replaced
        self._last_renewal = None

    def _ours(self, record):
        """The generation of the object when it holds `record` (a write whose reply was lost
        but which took effect looks like a refused one), else None."""
        current = self.store.read()
        if current is not None and (parse_record(current[0]) or {}).get('token') == record['token']:
            return current[1]
        return None

    def acquire(self, record, takeover_stale):
        clock = self.clock
        data = json.dumps(record)
        for _ in range(5):   # the object may change between our requests: decide again
            generation = self.store.create_if_absent(data)
            if generation is None:
                current = self.store.read()
                if current is None:
                    continue
                holder, held_generation = parse_record(current[0]), current[1]
                if holder is not None and holder.get('token') == record['token']:
                    generation = held_generation
                else:
                    stale = holder is None or is_stale(holder, clock(), self.stale_after_s)
                    if not ((stale and takeover_stale) or (holder is not None and holder_is_dead(holder))):
                        raise LeaseHeld(refusal(self.workdir, holder, clock(), stale, self.stale_after_s))
                    generation = (self.store.replace_if_generation(data, held_generation)
                                  or self._ours(record))
                    if generation is None:
                        continue
                    self.taken_over = holder or {}
            self.generation, self._last_renewal = generation, clock()
            return
        raise LeaseHeld(f'workdir {self.workdir}: its lease kept changing while this run tried to take it; '
                        f'another run is starting there: stop one of them')

    def heartbeat(self, record):
        """Renews; returns why the lease is lost, or None."""
        now = record['heartbeat']
        try:
            generation = self.store.replace_if_generation(json.dumps(record), self.generation)
            if generation is None:
                generation = self._ours(record)
        except Exception as e:  # noqa: BLE001 - a bucket hiccup: retried at the next heartbeat...
            if now - self._last_renewal > self.stale_after_s:   # ...until another run may take over
                return f'could not renew it for {int(now - self._last_renewal)} s ({type(e).__name__}: {e})'
            return None
        if generation is None:
            current = self.store.read()
            holder = parse_record(current[0]) if current else None
            return f'it was taken over by {describe(holder, now)}' if current else 'its lease object was deleted'
        self.generation, self._last_renewal = generation, now
        return None

    def check(self):
        """Why the lease is lost, read from the bucket now (a heartbeat can be HEARTBEAT_S old)."""
        current = self.store.read()
        if current is None:
            return 'its lease object was deleted'
        if current[1] != self.generation:
            return f'it was taken over by {describe(parse_record(current[0]), self.clock())}'
        return None

    def release(self):
        generation, self.generation = self.generation, None
        if generation is None or fs.known_unreachable(self.workdir):
            return   # the run already stops in one line on that bucket: the lease is left to go stale
        try:
            self.store.delete_if_generation(generation)
        except Exception as e:  # noqa: BLE001 - an unreachable bucket leaves the lease to go stale
            if not bucket.unreachable(e):
                raise
            print(f'warning: could not release the lease {fs.join(self.workdir, RECORD)} '
                  f'({type(e).__name__}); a run on this machine takes it over at once, one elsewhere after '
                  f'{int(self.stale_after_s)} s with {TAKEOVER_FLAG}', file=sys.stderr, flush=True)
