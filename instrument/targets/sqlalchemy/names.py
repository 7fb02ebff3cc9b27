# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""The name a database goes by in the records: its engine URL's; the
engines of the process.

``database_name``, shared by the SQL records (``listeners``), the pool's
(``pool``), the resource samples (``instrument.runtime.resources``)
and nova's cell queries (``instrument.targets.nova.cells``).  Imports
nothing of SQLAlchemy: it reads a URL object it is given.

``engine_events()``: do the SQLAlchemy taps listen to engine
(``ConnectionEvents``) events?  Under SQLAlchemy 1.4 only: from 2.0 on
none does (a class-level one sets ``Engine._has_events``, and every
Connection of the process takes SQLAlchemy's event paths); they see a
new engine when ``create_engine`` makes it (``Dialect.engine_created``)
and those made before they were installed in ``existing_engines()``.
"""

import functools
import gc
import importlib.metadata
import os
import sys

MEMORY_DB = ':memory:'


def database_name(url) -> str:
    """Database of an engine URL; for sqlite the file name or
    ``:memory:``."""
    database = getattr(url, 'database', None)
    backend = ''
    try:
        backend = url.get_backend_name()
    except Exception:  # a URL-like object without the method
        pass
    if backend == 'sqlite':
        if (
            not database
            or database == MEMORY_DB
            or database.startswith('file::memory:')
        ):
            return MEMORY_DB
        return os.path.basename(database.split('?', 1)[0]) or database
    return database or ''


@functools.cache
def engine_events() -> bool:
    """SQLAlchemy 1.4 (engine listeners), read from its metadata
    without importing it; False without SQLAlchemy."""
    try:
        version = importlib.metadata.version('SQLAlchemy')
    except importlib.metadata.PackageNotFoundError:
        return False
    return version.startswith('1.')


def existing_engines() -> list:
    """The SQLAlchemy engines of the process (none when it has not
    imported SQLAlchemy), found by the garbage collector as the objects
    that refer to their class (an instance of a class made in Python
    does): once at install, never per statement (30 to 60 ms among a
    million objects at load average 15 to 21; a scan of
    ``gc.get_objects()`` asking each its class, 0.5 to 1.1 s)."""
    module = sys.modules.get('sqlalchemy.engine.base')
    engine_cls = getattr(module, 'Engine', None)
    if engine_cls is None:
        return []
    classes = [engine_cls]
    for cls in classes:  # grows: every subclass (OptionEngine...)
        classes.extend(
            sub for sub in cls.__subclasses__() if sub not in classes
        )
    out = []
    for obj in gc.get_referrers(*classes):
        try:
            if type(obj) in classes:
                out.append(obj)
        except Exception:  # noqa: BLE001,S112 - never at install
            continue
    return out
