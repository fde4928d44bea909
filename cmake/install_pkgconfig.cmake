# Run by `cmake --install` / cpack (install(CODE) in cmake/packaging.cmake):
# writes relaxps.pc for the prefix being installed into and installs it.
#
# In: RELAXPS_PC_TEMPLATE (relaxps.pc.in configured but for @RELAXPS_PC_PREFIX@ and
# @RELAXPS_PC_RPATH@), RELAXPS_PC_STAGING (a folder of the build tree),
# RELAXPS_PC_LIBDIR (CMAKE_INSTALL_LIBDIR), RELAXPS_PC_TO_PREFIX (the path
# from <libdir>/pkgconfig up to the prefix) and CMake's CMAKE_INSTALL_PREFIX
# (the prefix of this install; DESTDIR is applied by file(INSTALL)).
#
# /usr (or /): prefix=/usr, as every .pc of the system (pkg-config then
# recognises /usr/include and /usr/lib as system folders and leaves them out),
# no rpath: the dynamic linker searches /usr/lib anyway, and Debian forbids an
# RPATH to it. Any other prefix: found relative to the .pc (${pcfiledir}), so
# the prefix can move, and -Wl,-rpath,${libdir}. /usr/local gets it too: the
# dynamic linker finds /usr/local/lib only through ld.so.cache, after ldconfig.
string(REGEX REPLACE "/+$" "" _relaxps_prefix "${CMAKE_INSTALL_PREFIX}")
if(_relaxps_prefix STREQUAL "/usr" OR _relaxps_prefix STREQUAL "")
  set(RELAXPS_PC_PREFIX "/usr")
  set(RELAXPS_PC_RPATH "")
else()
  set(RELAXPS_PC_PREFIX "\${pcfiledir}/${RELAXPS_PC_TO_PREFIX}")
  set(RELAXPS_PC_RPATH "-Wl,-rpath,\${libdir}")
endif()
configure_file("${RELAXPS_PC_TEMPLATE}" "${RELAXPS_PC_STAGING}/relaxps.pc" @ONLY)
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/${RELAXPS_PC_LIBDIR}/pkgconfig"
  TYPE FILE FILES "${RELAXPS_PC_STAGING}/relaxps.pc")
