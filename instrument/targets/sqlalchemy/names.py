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
"""The name a database goes by in the records: its engine URL's.

One function, shared by the SQL records (``listeners``), the pool's
(``pool``), the resource samples (``instrument.runtime.resources``)
and nova's cell queries (``instrument.targets.nova.cells``).  Imports
nothing of SQLAlchemy: it reads a URL object it is given.
"""

import os

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
