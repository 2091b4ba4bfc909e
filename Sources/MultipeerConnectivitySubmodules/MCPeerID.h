// Empty: `import MultipeerConnectivity.MCPeerID` brings the Swift module MultipeerConnectivity, which declares it.
