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
"""Make nova's api-paste.ini visible where nova's test fixtures look.

The nova wheel installs ``etc/nova/api-paste.ini`` under the venv prefix,
while nova's ConfFixture looks for it under ``site-packages/etc/nova``.
Run inside the venv (tox ``commands_pre``); idempotent.
"""

import os
import sys
import sysconfig


def main() -> int:
    source = os.path.join(sys.prefix, 'etc', 'nova')
    target = os.path.join(sysconfig.get_paths()['purelib'], 'etc', 'nova')
    if not os.path.exists(os.path.join(source, 'api-paste.ini')):
        print(
            'nova_paste_bridge: no %s/api-paste.ini; is nova installed '
            'in this venv?' % source,
            file=sys.stderr,
        )
        return 1
    if os.path.exists(os.path.join(target, 'api-paste.ini')):
        return 0
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.islink(target):
        os.unlink(target)
    os.symlink(source, target)
    print('nova_paste_bridge: %s -> %s' % (target, source))
    return 0


if __name__ == '__main__':
    sys.exit(main())
