# `cmake --install BUILD --prefix PREFIX`: the libraries, their headers under
# include/stalloc/ (root-relative, as the sources include them: "src/runtime.h"), the CLI,
# libstalloc_torch.so, and a package config so that a C++ project can
#   find_package(stalloc REQUIRED)
#   target_link_libraries(app PRIVATE stalloc::runtime)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(STALLOC_INSTALL_LIBRARIES stalloc_common stalloc_vmm stalloc_trace stalloc_dsa stalloc_workload
  stalloc_chunk_planner stalloc_runtime stalloc_sim)
foreach(lib ${STALLOC_INSTALL_LIBRARIES})
  string(REPLACE "stalloc_" "" export_name ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${export_name})
endforeach()
install(TARGETS ${STALLOC_INSTALL_LIBRARIES} EXPORT stallocTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/stalloc)
install(TARGETS stalloc_torch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS stalloc RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY common vmm trace workload planner src sim
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/stalloc
  FILES_MATCHING PATTERN "*.h")
install(FILES ${CMAKE_BINARY_DIR}/generated/common/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/stalloc/common)
install(EXPORT stallocTargets NAMESPACE stalloc::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stalloc)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/stallocConfig.cmake.in
  ${CMAKE_BINARY_DIR}/stallocConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stalloc)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/stallocConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/stallocConfig.cmake ${CMAKE_BINARY_DIR}/stallocConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stalloc)
