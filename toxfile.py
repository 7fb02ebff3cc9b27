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
"""tox's inline plugin (tox 4 loads ``toxfile.py`` next to ``tox.ini``).

The first ``tox -e demo`` installs nova 34 with its test requirements:
a minute or more during which tox, at its default verbosity, shows one
``install_deps>`` line and nothing else.  Before that install this
plugin says what is happening, once per environment that installs nova
(``demo``, ``functional``, ``bench-boot``, ``integration``...) and
only while nova is not installed in it yet.
"""

import pathlib
import re
import sys
import typing

try:
    from tox.plugin import impl
except ImportError:  # imported outside tox, by its unit test

    def impl(function):  # type: ignore[no-redef]
        return function


def build_message(
    env: str, site_packages: pathlib.Path, deps: typing.Iterable[str]
) -> typing.Optional[str]:
    """What to say before installing ``deps`` into the environment
    ``env``; None when the install is not nova's or nova is there."""
    lines = [line for line in deps if 'requirements/nova' in line]
    if not lines:
        return None
    if (site_packages / 'nova').is_dir():
        return None
    # requirements/nova-NN.txt: an older release (functional-novaNN)
    found = re.search(r'requirements/nova-(\d+)\.txt', ' '.join(lines))
    release = found.group(1) if found else '34'
    return (
        '%s: installing nova %s, its test requirements (about 150 '
        'packages) and openstack-instrument: a minute or two with '
        'pip\'s cache, a few minutes the first time; pip\'s output '
        'is hidden (tox -v shows it)' % (env, release)
    )


def _lines(arguments: typing.Any) -> list:
    lines = getattr(arguments, 'lines', None)
    if callable(lines):
        try:
            return [str(line) for line in lines()]
        except Exception:  # a file that cannot be read: say nothing
            return []
    if isinstance(arguments, (list, tuple)):
        return [str(a) for a in arguments]
    return [str(arguments)]


@impl
def tox_on_install(tox_env, arguments, section, of_type) -> None:
    """Before an install: the message of ``build_message``, if any."""
    try:
        message = build_message(
            tox_env.name,
            pathlib.Path(tox_env.env_site_package_dir()),
            _lines(arguments),
        )
    except Exception:  # never stop tox for a message
        return
    if message:
        sys.stdout.write(message + '\n')
        sys.stdout.flush()
