# Install layout, find_package/pkg-config files and the Debian packages.
#
# Install components (install(... COMPONENT c) in the folders) and the
# package each becomes with `cpack -G DEB` (docs/install.md):
#   client  -> librelaxps-client      librelaxps_client.so.N (links libzmq,
#                                     protobuf, libstdc++/libc: nothing else)
#   dev     -> librelaxps-client-dev  include/relaxps, the .so link,
#                                     find_package(relaxps COMPONENTS client),
#                                     relaxps.pc
#   python  -> python3-relaxps        the Python package `relaxps`
#   runtime -> relaxps-server         coordinator, server, worker, ctl,
#                                     relaxps-launch, the launch scripts
#   cuda    -> relaxps-cuda           the CUDA back end (a dlopen()ed module)
# Depends are computed by dpkg-shlibdeps, except for relaxps-cuda: the CUDA
# 13 runtime and cuBLAS are in no Debian package, so nothing could satisfy
# a dependency on them (the loader says at run time what is missing).
#
# Packages for a Debian system are best built from a build directory
# configured with -DCMAKE_INSTALL_PREFIX=/usr (libraries then go to Debian's
# multiarch folder, lib/<triplet>); scripts/package_test.sh does that.
include(CMakePackageConfigHelpers)

# ---- Headers, CMake package, pkg-config -----------------------------------------
install(DIRECTORY include/relaxps DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(EXPORT relaxpsTargets NAMESPACE relaxps:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/relaxps
  COMPONENT dev)
configure_package_config_file(cmake/relaxpsConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/relaxpsConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/relaxps)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/relaxpsConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/relaxpsConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/relaxpsConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/relaxps COMPONENT dev)

# relaxps.pc in a prefix other than /usr finds the prefix relative to itself
# (${pcfiledir}), so a moved prefix works as is, and its Libs carry
# -Wl,-rpath,${libdir}, so that a program built with `pkg-config --libs
# relaxps` runs without LD_LIBRARY_PATH; in /usr (the packages) it is a plain
# prefix=/usr without rpath. Whether the prefix is /usr is known only at
# install time (cpack installs into /usr, a build directory configured for
# /usr/local may be installed anywhere with --prefix), so
# cmake/install_pkgconfig.cmake writes the file then.
file(RELATIVE_PATH RELAXPS_PC_TO_PREFIX
  ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
# Left for the install step.
set(RELAXPS_PC_PREFIX "@RELAXPS_PC_PREFIX@")
set(RELAXPS_PC_RPATH "@RELAXPS_PC_RPATH@")
configure_file(cmake/relaxps.pc.in ${CMAKE_CURRENT_BINARY_DIR}/relaxps.pc.install.in @ONLY)
install(CODE "
  set(RELAXPS_PC_TEMPLATE \"${CMAKE_CURRENT_BINARY_DIR}/relaxps.pc.install.in\")
  set(RELAXPS_PC_STAGING \"${CMAKE_CURRENT_BINARY_DIR}/pkgconfig-install\")
  set(RELAXPS_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(RELAXPS_PC_TO_PREFIX \"${RELAXPS_PC_TO_PREFIX}\")
  include(\"${PROJECT_SOURCE_DIR}/cmake/install_pkgconfig.cmake\")"
  COMPONENT dev)

# ---- Launch scripts (relaxps-server): relaxps-launch from PATH when not in a checkout
install(PROGRAMS scripts/launch.sh scripts/slurm/relaxps.sbatch
  DESTINATION ${CMAKE_INSTALL_DATADIR}/relaxps/scripts COMPONENT runtime)

# ---- Debian packages: cpack -G DEB (in the build directory) -----------------------
set(CPACK_PACKAGE_NAME relaxps)
set(CPACK_PACKAGE_VENDOR "relaxps")
# The Maintainer field: who builds the packages (default: git's user.name and
# user.email of the source tree).
if(NOT RELAXPS_DEB_MAINTAINER)
  execute_process(COMMAND git -C ${PROJECT_SOURCE_DIR} config user.name
    OUTPUT_VARIABLE _relaxps_git_name OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  execute_process(COMMAND git -C ${PROJECT_SOURCE_DIR} config user.email
    OUTPUT_VARIABLE _relaxps_git_email OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_relaxps_git_name AND _relaxps_git_email)
    set(_relaxps_maintainer "${_relaxps_git_name} <${_relaxps_git_email}>")
  else()
    set(_relaxps_maintainer "relaxps maintainers <relaxps@localhost>")
  endif()
  set(RELAXPS_DEB_MAINTAINER "${_relaxps_maintainer}" CACHE STRING
    "Maintainer of the Debian packages, 'Name <email>'")
endif()
set(CPACK_PACKAGE_CONTACT "${RELAXPS_DEB_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "parameter server for data-parallel training")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A shlibs file for librelaxps-client (the only package with a versioned
# shared library), so that packages built against it get their Depends.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# python3-relaxps' module links librelaxps_client.so.N of this build; where
# dpkg-shlibdeps finds it (its package dependency is stated explicitly).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/client)
# Binaries and libraries in the packages are stripped (lintian
# unstripped-binary-or-object); the build tree keeps its symbols.
set(CPACK_STRIP_FILES ON)
set(_relaxps_deb_version "${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")
set(RELAXPS_DEB_VERSION ${_relaxps_deb_version})  # packaging/changelog.Debian.in

# CPack joins a component's description lines with the Debian control file's
# continuation rules: line 1 is the synopsis, the rest the long description.
set(CPACK_COMPONENTS_ALL client dev runtime)

# librelaxps-client
set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME librelaxps-client)
set(CPACK_DEBIAN_CLIENT_PACKAGE_SECTION libs)
# An ldconfig trigger instead of CPack's postinst/postrm calling ldconfig.
configure_file(packaging/deb/librelaxps-client.triggers
  ${CMAKE_CURRENT_BINARY_DIR}/packaging/client/triggers COPYONLY)
set(_relaxps_no_ldconfig_scripts
  ${PROJECT_SOURCE_DIR}/packaging/deb/postinst ${PROJECT_SOURCE_DIR}/packaging/deb/postrm)
set(CPACK_DEBIAN_CLIENT_PACKAGE_CONTROL_EXTRA
  ${CMAKE_CURRENT_BINARY_DIR}/packaging/client/triggers ${_relaxps_no_ldconfig_scripts})
set(CPACK_DEBIAN_CLIENT_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_COMPONENT_CLIENT_DESCRIPTION "relaxps parameter server - client library
The shared library librelaxps_client.so that trainers link to push gradients
to and pull parameters from a relaxps job (BSP, SSP or async). It depends
only on ZeroMQ and Protocol Buffers: none of the server's libraries.")

# librelaxps-client-dev
set(CPACK_DEBIAN_DEV_PACKAGE_NAME librelaxps-client-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "librelaxps-client (= ${_relaxps_deb_version})")
set(CPACK_DEBIAN_DEV_PACKAGE_RECOMMENDS "pkgconf | pkg-config, cmake")
set(CPACK_COMPONENT_DEV_DESCRIPTION "relaxps parameter server - client development files
The public headers (#include <relaxps/client.h>), the CMake package
(find_package(relaxps COMPONENTS client), target relaxps::client) and the
pkg-config file relaxps.pc for building trainers against librelaxps-client.")

# relaxps-server
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME relaxps-server)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION science)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "openssh-client, slurm-client")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "relaxps parameter server - coordinator, servers and tools
relaxps-coordinator, relaxps-server (RocksDB-backed shards), relaxps-worker
(the built-in CPU trainer), relaxps-ctl (status, tables, checkpoints,
metrics) and relaxps-launch (runs and supervises a job on local processes,
ssh hosts or Slurm, with fault injection), with the launch scripts in
/usr/share/relaxps/scripts.")

# python3-relaxps
if(RELAXPS_HAVE_PYTHON)
  list(APPEND CPACK_COMPONENTS_ALL python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-relaxps)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
  # The extension module is built for this interpreter's ABI only.
  math(EXPR _relaxps_py_next "${Python_VERSION_MINOR} + 1")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
    "librelaxps-client (= ${_relaxps_deb_version}), python3-numpy, python3 (>= ${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}~), python3 (<< ${Python_VERSION_MAJOR}.${_relaxps_py_next})")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SUGGESTS "python3-torch")
  set(CPACK_COMPONENT_PYTHON_DESCRIPTION "relaxps parameter server - Python client
The Python package relaxps (import relaxps): the client on numpy arrays and
CPU torch tensors without copies, and relaxps.torch to keep a
torch.nn.Module's parameters on the servers.")
endif()

# relaxps-cuda
if(RELAXPS_HAVE_CUDA)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME relaxps-cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_SECTION science)
  set(CPACK_DEBIAN_CUDA_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_CUDA_PACKAGE_CONTROL_EXTRA ${_relaxps_no_ldconfig_scripts})
  set(CPACK_DEBIAN_CUDA_PACKAGE_CONTROL_STRICT_PERMISSION ON)
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "relaxps-server (= ${_relaxps_deb_version})")
  set(CPACK_COMPONENT_CUDA_DESCRIPTION "relaxps parameter server - CUDA back end
The CUDA kernels and cuBLAS back end of relaxps-worker and relaxps-server
(--device=cuda), loaded on first use. It needs NVIDIA's CUDA ${CUDAToolkit_VERSION_MAJOR} runtime
(libcudart.so.${CUDAToolkit_VERSION_MAJOR}) and cuBLAS (libcublas.so.${CUDAToolkit_VERSION_MAJOR}) and a driver, which no
Debian package provides: this package does not depend on them (its
dependencies are not computed from its libraries), install them from
NVIDIA. Without them --device=cuda fails with an error naming the missing
library; the CPU back end works as before.")
endif()

# Every package: /usr/share/doc/<package>/{copyright,changelog.Debian.gz} and
# its lintian overrides (packaging/lintian/<package>: each says why).
configure_file(packaging/changelog.Debian.in ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian
  @ONLY)
execute_process(COMMAND gzip -9 -n -c
  INPUT_FILE ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian
  OUTPUT_FILE ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian.gz
  RESULT_VARIABLE _relaxps_gzip)
if(NOT _relaxps_gzip EQUAL 0)
  message(FATAL_ERROR "gzip of packaging/changelog.Debian failed")
endif()
foreach(_c IN LISTS CPACK_COMPONENTS_ALL)
  string(TOUPPER ${_c} _C)
  set(_pkg ${CPACK_DEBIAN_${_C}_PACKAGE_NAME})
  install(FILES packaging/copyright ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian.gz
    DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${_pkg} COMPONENT ${_c})
  if(EXISTS ${PROJECT_SOURCE_DIR}/packaging/lintian/${_pkg})
    install(FILES packaging/lintian/${_pkg} DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
      COMPONENT ${_c})
  endif()
endforeach()

include(CPack)
