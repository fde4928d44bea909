# Run by `cmake --install` / cpack (install(CODE) in cmake/packaging.cmake):
# writes relaxps.pc for the prefix being installed into and installs it.
#
# In: RELAXPS_PC_TEMPLATE (relaxps.pc.in configured but for
# @RELAXPS_PC_RPATH@), RELAXPS_PC_STAGING (a folder of the build tree),
# RELAXPS_PC_LIBDIR (CMAKE_INSTALL_LIBDIR), and CMake's CMAKE_INSTALL_PREFIX
# (the prefix of this install; DESTDIR is applied by file(INSTALL)).
#
# Libs gets -Wl,-rpath,${libdir} unless the prefix is /usr (or /), whose
# lib folders the dynamic linker searches anyway and where Debian forbids an
# RPATH. /usr/local gets it too: the dynamic linker finds /usr/local/lib only
# through ld.so.cache, i.e. after ldconfig.
string(REGEX REPLACE "/+$" "" _relaxps_prefix "${CMAKE_INSTALL_PREFIX}")
if(_relaxps_prefix STREQUAL "/usr" OR _relaxps_prefix STREQUAL "")
  set(RELAXPS_PC_RPATH "")
else()
  set(RELAXPS_PC_RPATH "-Wl,-rpath,\${libdir}")
endif()
configure_file("${RELAXPS_PC_TEMPLATE}" "${RELAXPS_PC_STAGING}/relaxps.pc" @ONLY)
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/${RELAXPS_PC_LIBDIR}/pkgconfig"
  TYPE FILE FILES "${RELAXPS_PC_STAGING}/relaxps.pc")
