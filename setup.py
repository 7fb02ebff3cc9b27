# Copyright (c) 2026 openstack-instrument developers
#
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

import os

import setuptools
from setuptools.command import build_ext


def _copy_by_rename(self, infile, outfile, *args, **kwargs):
    """``build_ext``'s copy of an extension into the source tree (``pip
    install -e``) as a rename, never a rewrite in place: a process that
    has the old one loaded (tests running while another tox environment
    installs this tree) keeps its file instead of finding its mapped
    pages cut off.  (pbr sets ``cmdclass`` from setup.cfg alone, so the
    command's method is replaced, in this build process only.)"""
    if os.path.isdir(outfile):
        outfile = os.path.join(outfile, os.path.basename(infile))
    part = '%s.%d.part' % (outfile, os.getpid())
    copied = _copy_file(self, infile, part, *args, **kwargs)
    os.replace(part, outfile)
    return outfile, copied[1]


_copy_file = build_ext.build_ext.copy_file
build_ext.build_ext.copy_file = _copy_by_rename

# The optional compiled helpers of the hot path (instrument/_native/):
# a host without a C compiler installs without them (optional=True) and
# runs their pure-Python twins, which give the same bytes.
NATIVE = ('breakdown', 'lines', 'scan', 'span')

setuptools.setup(
    setup_requires=['pbr>=6.0.0'],
    ext_modules=[
        setuptools.Extension(
            'instrument._native._' + name,
            ['instrument/_native/%s.c' % name],
            optional=True,
        )
        for name in NATIVE
    ],
    pbr=True,
)
