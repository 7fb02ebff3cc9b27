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
"""Old name of instrument.loaders, kept for operators' api-paste.ini.

Only instrument.loader.paste:filter_factory (the line an operator
wrote in api-paste.ini before the package was renamed) is kept working;
new configuration names instrument.loaders.paste:filter_factory.
Nothing in this project imports this package.
"""
