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
"""Sphinx configuration of the documentation (tox -e docs)."""

extensions = [
    # .. show-options:: renders the [instrument] options from the
    # oslo.config.opts entry point (instrument.opts:list_opts)
    'oslo_config.sphinxext',
    'openstackdocstheme',
]

# openstackdocstheme options
openstackdocs_repo_name = 'openstack/openstack-instrument'
openstackdocs_auto_name = False
openstackdocs_bug_project = 'openstack-instrument'
openstackdocs_bug_tag = ''

project = 'openstack-instrument'
copyright = '2026, openstack-instrument developers'
master_doc = 'index'
source_suffix = '.rst'
exclude_patterns = []
pygments_style = 'native'
html_theme = 'openstackdocs'


def _readme_images(app, relative_path, parent_docname, content):
    """README.rst names its images from the repository's root (where
    readers of the repository see it); included in readme.rst they are
    read from doc/source."""
    if str(relative_path).endswith('README.rst'):
        content[0] = content[0].replace('doc/source/images/', 'images/')


def setup(app):
    app.connect('include-read', _readme_images)
