# What `cmake --install` puts where (docs/operations.md, "Install").
#
#   cmake --install build                          # everything under /usr/local
#   cmake --install build --prefix /opt/shelf      # elsewhere
#   cmake --install build --component runtime      # binaries only
#   cmake --install build --component deploy       # units, examples, docs
#
# Components:
#   runtime  bin/shelf-master, shelf-store, shelf-resp, shelfctl, shelf-bench (those built)
#   deploy   lib/systemd/system/shelf-{master,store,resp}.service, with ExecStart
#            pointing at <prefix>/bin; lib/sysusers.d/shelf.conf (the `shelf`
#            user); share/shelf/examples/{master,store,resp}.conf (copy them to
#            /etc/shelf/, which the units read: an upgrade never overwrites
#            an operator's config); share/shelf/kubernetes/ (the manifests);
#            share/doc/shelf/*.md
include(GNUInstallDirs)

foreach(shelf_bin shelf-master shelf-store shelf-resp shelfctl shelf-bench)
  if(TARGET ${shelf_bin})
    install(TARGETS ${shelf_bin} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
  endif()
endforeach()

# The units in deploy/systemd/ name /usr/local; rewrite them for the prefix
# given at install time (which may differ from the configured one).
foreach(shelf_unit shelf-master.service shelf-store.service shelf-resp.service)
  install(CODE "
    file(READ \"${PROJECT_SOURCE_DIR}/deploy/systemd/${shelf_unit}\" shelf_text)
    string(REPLACE \"/usr/local/bin/\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/\"
           shelf_text \"\${shelf_text}\")
    string(REPLACE \"/usr/local/share/doc/shelf/\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DOCDIR}/\"
           shelf_text \"\${shelf_text}\")
    set(shelf_dest \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system/${shelf_unit}\")
    message(STATUS \"Installing: \${shelf_dest}\")
    file(WRITE \"\${shelf_dest}\" \"\${shelf_text}\")
  " COMPONENT deploy)
endforeach()

install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/shelf.sysusers
        DESTINATION lib/sysusers.d RENAME shelf.conf COMPONENT deploy)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/config/master.conf
              ${PROJECT_SOURCE_DIR}/deploy/config/store.conf
              ${PROJECT_SOURCE_DIR}/deploy/config/resp.conf
        DESTINATION ${CMAKE_INSTALL_DATADIR}/shelf/examples COMPONENT deploy)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/kubernetes/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/shelf/kubernetes COMPONENT deploy
        USE_SOURCE_PERMISSIONS)
file(GLOB shelf_docs ${PROJECT_SOURCE_DIR}/docs/*.md)
if(shelf_docs)
  install(FILES ${shelf_docs} DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT deploy)
endif()
